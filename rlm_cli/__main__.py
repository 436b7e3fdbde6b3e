"""``python -m rlm_cli`` runs the same command line as ``rlm``."""

from rlm_cli.commands.launch import main

if __name__ == "__main__":
    main()
