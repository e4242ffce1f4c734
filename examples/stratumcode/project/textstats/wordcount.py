"""Word counts of a text."""


def count_words(text):
    """How often each word occurs in `text`, as a dict."""
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts


def top_words(text, n):
    """The `n` most frequent words, most frequent first (ties: alphabetical)."""
    counts = count_words(text)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [word for word, _ in ranked[:n]]
