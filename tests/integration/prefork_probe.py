"""What a started process sees of itself, printed as one JSON line (for test_prefork.py)."""

from __future__ import annotations

import json
import os
import random
import sys


def main() -> int:
    args = sys.argv[1:]
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = f.read()
    said = {"argv": args, "cwd": os.getcwd(), "probe": os.environ.get("ROQ_PROBE"), "random": random.random(),
            "cmdline": cmdline.decode(), "stdin": sys.stdin.read() if "--read-stdin" in args else None,
            "main": __name__}
    if "--nested" in args:  # a process that starts its own (its server a fork of it), which start their own...
        from roq import prefork
        from roq.process import spawn

        depth = int(args[args.index("--nested") + 1])
        prefork.prepare()
        child = spawn("nested", "tests.integration.prefork_probe", ["--nested", str(depth - 1)] if depth > 1 else [])
        said["nested"] = [json.loads(child.communicate(30).splitlines()[0]), child.returncode]
    print(json.dumps(said), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if "--exit" in args:
        return int(args[args.index("--exit") + 1])
    if "--sleep" in args:
        import time
        time.sleep(float(args[args.index("--sleep") + 1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
