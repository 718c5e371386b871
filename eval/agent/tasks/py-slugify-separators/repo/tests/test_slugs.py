import unittest

from slugs import slugify


class SlugifyTest(unittest.TestCase):
    def test_simple_title(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_accents(self):
        self.assertEqual(slugify("Café au lait"), "cafe-au-lait")

    def test_max_length(self):
        self.assertEqual(len(slugify("a" * 100)), 60)


if __name__ == "__main__":
    unittest.main()
