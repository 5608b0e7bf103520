"""A stand-in for ``python -m vllm.entrypoints.openai.api_server`` (test helper, run as a subprocess).

It takes vLLM's own options, prints the banner of every patch flag that is set to 1 in its
environment (the mapping comes from FAKE_VLLM_BANNERS, the way the patched code carries its banner),
then serves the recordings for its ``--tool-call-parser`` on ``--host``/``--port``.
FAKE_VLLM_NEVER_READY=1 makes it print its banners and never open the port; FAKE_VLLM_EXIT=N makes it
exit with code N after the banners (a crash during boot); FAKE_VLLM_STALE_EVERY=K injects the seeds'
stale-slot defect under concurrency (see replay.py) and FAKE_VLLM_LATENCY_S slows each answer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import ReplayServer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tool-call-parser", default="")
    args, _unknown = parser.parse_known_args()

    print(f"INFO fake vllm starting {args.model} as {args.served_model_name}", flush=True)
    for flag, banner in json.loads(os.environ.get("FAKE_VLLM_BANNERS", "{}")).items():
        if os.environ.get(flag) == "1":
            print(f"INFO {banner}", flush=True)
    if os.environ.get("FAKE_VLLM_EXIT"):
        print("ERROR boot failed", flush=True)
        return int(os.environ["FAKE_VLLM_EXIT"])
    if os.environ.get("FAKE_VLLM_NEVER_READY") == "1":
        while True:
            time.sleep(1)
    server = ReplayServer(args.served_model_name, args.tool_call_parser or "no_parser", port=args.port, host=args.host,
                          stale_every=int(os.environ.get("FAKE_VLLM_STALE_EVERY", "0")),
                          latency_s=float(os.environ.get("FAKE_VLLM_LATENCY_S", "0")))
    print(f"INFO Uvicorn running on http://{args.host}:{args.port}", flush=True)
    server.httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
