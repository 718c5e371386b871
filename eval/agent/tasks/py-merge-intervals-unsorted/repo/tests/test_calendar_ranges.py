import unittest

from calendar_ranges import merge, total_length


class MergeTest(unittest.TestCase):
    def test_overlapping(self):
        self.assertEqual(merge([(1, 3), (2, 6), (8, 10)]), [(1, 6), (8, 10)])

    def test_touching(self):
        self.assertEqual(merge([(1, 3), (3, 5)]), [(1, 5)])

    def test_empty(self):
        self.assertEqual(merge([]), [])

    def test_total_length(self):
        self.assertEqual(total_length([(0, 10), (5, 15)]), 15)
