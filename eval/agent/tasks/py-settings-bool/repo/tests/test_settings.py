import os
import tempfile
import unittest

from settings import Settings


class SettingsTest(unittest.TestCase):
    def test_from_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "app.conf")
            with open(path, "w", encoding="utf-8") as f:
                f.write("# app\nname = shop\nworkers = 4\n")
            s = Settings.from_file(path)
        self.assertEqual(s.get("name"), "shop")
        self.assertEqual(s.get_int("workers"), 4)

    def test_defaults(self):
        s = Settings()
        self.assertEqual(s.get_int("workers", 2), 2)
        self.assertIs(s.get_bool("debug"), False)
        self.assertIs(s.get_bool("debug", True), True)

    def test_bool_true(self):
        self.assertIs(Settings({"debug": "true"}).get_bool("debug"), True)
