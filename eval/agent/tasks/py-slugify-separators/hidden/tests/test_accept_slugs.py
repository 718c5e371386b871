import unittest

from slugs import slugify


class AcceptSlugifyTest(unittest.TestCase):
    def test_punctuation_and_spaces_collapse(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify("  Go 1.22: what is new?  "), "go-1-22-what-is-new")
        self.assertEqual(slugify("a -- b"), "a-b")

    def test_unchanged_cases(self):
        self.assertEqual(slugify("Café au lait"), "cafe-au-lait")
        self.assertEqual(slugify("plain"), "plain")
        self.assertEqual(slugify("!!!"), "")
