"""`python -m featstore ...`: the `featstore` command, so that `torchrun -m featstore extract
...` works (torchrun runs a module, not a console script).

Under torchrun only rank 0 prints results (the store summary, --json): the standard output of
the other ranks goes to /dev/null. Their errors still reach stderr."""

import os


def is_main_process() -> bool:
    """Whether this process is rank 0 (always true outside torchrun): it alone prints. Read
    from the environment alone: nothing here imports torch, whose import can fail (under
    `ulimit -v`) before the CLI's error handling is in place."""
    return os.environ.get("RANK", "0").strip() in ("0", "")


if __name__ == "__main__":
    if not is_main_process():
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    from cli.app import main

    main()
