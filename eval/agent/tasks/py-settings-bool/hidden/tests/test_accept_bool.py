import unittest

from settings import Settings


class AcceptBoolTest(unittest.TestCase):
    def test_false_words(self):
        for word in ["false", "False", "FALSE", "0", "no", "No", "off", "OFF"]:
            with self.subTest(word=word):
                self.assertIs(Settings({"debug": word}).get_bool("debug", True), False)

    def test_true_words(self):
        for word in ["true", "True", "1", "yes", "YES", "on", "On"]:
            with self.subTest(word=word):
                self.assertIs(Settings({"debug": word}).get_bool("debug"), True)

    def test_missing_uses_default(self):
        self.assertIs(Settings().get_bool("debug", True), True)
        self.assertIs(Settings().get_bool("debug"), False)
