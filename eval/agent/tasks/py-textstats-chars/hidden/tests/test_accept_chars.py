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


class AcceptCharsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "notes.txt")
        with open(self.path, "w", encoding="utf-8") as f:
            f.write("héllo wörld\nbye\n")

    def tearDown(self):
        self.tmp.cleanup()

    def test_chars(self):
        self.assertEqual(run("--chars", self.path), (0, "chars: 16\n"))

    def test_words_and_chars(self):
        self.assertEqual(run("--chars", "--words", self.path), (0, "words: 3\nchars: 16\n"))

    def test_default_prints_all(self):
        self.assertEqual(run(self.path), (0, "lines: 2\nwords: 3\nchars: 16\n"))
