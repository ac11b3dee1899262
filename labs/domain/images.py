"""Container image references, as the OCI distribution's reference grammar reads them.

``[registry[:port]/]path[/path...][:tag][@digest]``: path components in lower case, a tag of
at most 128 characters, a digest ``algorithm:hex``. The grammar is distribution/reference's
(``reference/regexp.go``), which containerd and the kubelet apply to a pod's ``image``; a value it
refuses (a space, a model name such as ``Qwen/Qwen2.5-0.5B-Instruct``) can never be pulled.
"""

from __future__ import annotations

import re

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"\w[\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)
NAME_MAX_LENGTH = 255  # the grammar's limit on the name (registry and path)


def is_image_reference(value: str) -> bool:
    """Whether ``value`` is a container image reference a cluster could pull (``quay.io/ascend/vllm-ascend:v0.18.0``)."""
    if not isinstance(value, str):
        return False
    match = IMAGE_REFERENCE.fullmatch(value)
    return match is not None and len(match["name"]) <= NAME_MAX_LENGTH
