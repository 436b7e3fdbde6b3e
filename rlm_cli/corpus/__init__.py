"""The corpus: walking paths, ignore rules, reading text, chunking, and the cached chunk index.

Nothing in this package calls a model. ``load_corpus`` is the entry point the CLI uses.
"""

from rlm_cli.corpus.loader import LoadReport, SourceFile
from rlm_cli.corpus.model import Chunk, Corpus, FileEntry
from rlm_cli.corpus.store import load_corpus
from rlm_cli.corpus.walk import check_paths, discover

__all__ = ["Chunk", "Corpus", "FileEntry", "LoadReport", "SourceFile", "check_paths", "discover", "load_corpus"]
