"""`python -m optimizers.protocol.run --method M --dataset lcb --topology T --model qwen --seed S
--out DIR`: the seed's optimizer job, a thin entry point into `lcb optimize`
(`lcb.cli.optimize_cmd`; its docstring lists the flags, the output and the exit codes)."""

from lcb.cli.optimize_cmd import protocol_main

if __name__ == "__main__":
    protocol_main()
