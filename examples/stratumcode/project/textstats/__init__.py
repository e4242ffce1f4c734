"""textstats: small text statistics (the project StratumCode's example repairs)."""

from .wordcount import count_words, top_words

__all__ = ["count_words", "top_words"]
