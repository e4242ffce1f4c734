import unittest

from textstats import count_words, top_words


class CountWords(unittest.TestCase):
    def test_counts_repeated_words(self):
        self.assertEqual(count_words("a b a"), {"a": 2, "b": 1})

    def test_ignores_case(self):
        self.assertEqual(count_words("The the THE"), {"the": 3})

    def test_ignores_punctuation(self):
        self.assertEqual(count_words("Hello, world! Hello."), {"hello": 2, "world": 1})

    def test_empty_text(self):
        self.assertEqual(count_words(""), {})


class TopWords(unittest.TestCase):
    def test_most_frequent_first(self):
        self.assertEqual(top_words("b a b c b a", 2), ["b", "a"])

    def test_case_folded_ranking(self):
        self.assertEqual(top_words("Go go GO stop", 1), ["go"])


if __name__ == "__main__":
    unittest.main()
