#!/bin/sh
# Lab image entrypoint: run the NPU isolation self-test, then exec the lab's command.
#
#   ENTRYPOINT ["/usr/local/bin/npu-lab-entrypoint"]   CMD ["jupyter", "lab"]   (or "vllm", "serve")
#
# The self-test needs NPU_LAB_PORTAL_URL (the portal's base URL as seen from the lab), and reads
# LAB_SESSION_ID, FLEXNPU_MEMORY_MIB and the session secret that every lab pod receives (the file
# JUPYTER_TOKEN_FILE names in a JupyterLab pod, VLLM_API_KEY in a vLLM pod). NPU_LAB_SELFTEST_PROBE=1 also tries to allocate past the cap.
# A failed or over-cap self-test is reported to the portal and logged; the lab still starts
# (the portal flags the session and the card), unless NPU_LAB_SELFTEST_REQUIRED=1.
set -u
if [ -n "${NPU_LAB_PORTAL_URL:-}" ]; then
    probe=""
    [ "${NPU_LAB_SELFTEST_PROBE:-0}" = "1" ] && probe="--probe"
    python -m nodeagent selftest $probe
    status=$?
    if [ "$status" -ne 0 ] && [ "${NPU_LAB_SELFTEST_REQUIRED:-0}" = "1" ]; then
        echo "npu-lab-entrypoint: self-test exit $status and NPU_LAB_SELFTEST_REQUIRED=1: not starting the lab" >&2
        exit "$status"
    fi
else
    echo "npu-lab-entrypoint: NPU_LAB_PORTAL_URL is not set: no isolation self-test" >&2
fi
exec "$@"
