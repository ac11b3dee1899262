"""How the agent reads and changes its node's NPU cards: ``base`` is the contract (``NodeDriver``),
``flexnpu_smi`` the driver of a real node (``npu-smi`` and ``flexnpu-smi``), ``simulated`` an in-memory node.

Not the portal's cluster drivers (``labs.drivers``): these run on the node, one per agent.
"""
