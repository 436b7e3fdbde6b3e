"""The application layer between the commands and the loop: sessions over one loaded corpus
(``session``, its REPL lanes and per-question model layer in ``lane``), one-question runs
(``runner``), what a run decides first (``plan``) and hands back (``outcome``), ``rlm_query``
recursion (``recursion``), question lists (``batch``), replays (``replay``), the chat loop
(``chat``), phase tagging (``phases``) and the environment report (``doctor``)."""
