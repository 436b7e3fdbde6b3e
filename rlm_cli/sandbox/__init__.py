"""The sandboxed REPL: ``launcher`` starts ``worker`` (the same module at every isolation level)."""
