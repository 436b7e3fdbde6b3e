"""The application layer between the commands and the loop: sessions over one loaded corpus
(``session``), one-question runs (``runner``), question lists (``batch``), replays (``replay``),
the chat loop (``chat``), phase tagging (``phases``) and the environment report (``doctor``)."""
