import contextlib
import io
import os
import tempfile
import unittest

import textstats


def run(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = textstats.main(list(argv))
    return code, out.getvalue()


class TextstatsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "notes.txt")
        with open(self.path, "w", encoding="utf-8") as f:
            f.write("one two\nthree\n")

    def tearDown(self):
        self.tmp.cleanup()

    def test_words(self):
        self.assertEqual(run("--words", self.path), (0, "words: 3\n"))

    def test_lines(self):
        self.assertEqual(run("--lines", self.path), (0, "lines: 2\n"))
