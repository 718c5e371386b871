import unittest

from durations import format_duration, parse_duration


class AcceptDaysTest(unittest.TestCase):
    def test_format_days(self):
        self.assertEqual(format_duration(86400), "1d")
        self.assertEqual(format_duration(93784), "1d 2h 3m 4s")
        self.assertEqual(format_duration(2 * 86400 + 5), "2d 5s")
        self.assertEqual(format_duration(3725), "1h 2m 5s")
        self.assertEqual(format_duration(0), "0s")

    def test_parse_days(self):
        self.assertEqual(parse_duration("1d 2h"), 93600)
        self.assertEqual(parse_duration("3d"), 3 * 86400)
        self.assertEqual(parse_duration("1d 2h 3m 4s"), 93784)
        self.assertEqual(parse_duration("2m"), 120)
        with self.assertRaises(ValueError):
            parse_duration("1w")
