import unittest

from calendar_ranges import merge, total_length


class AcceptUnsortedTest(unittest.TestCase):
    def test_unsorted_input(self):
        self.assertEqual(merge([(5, 7), (1, 3), (2, 4)]), [(1, 4), (5, 7)])
        self.assertEqual(merge([(8, 9), (1, 10), (2, 3)]), [(1, 10)])
        self.assertEqual(merge([(10, 12), (0, 1)]), [(0, 1), (10, 12)])

    def test_total_length_unsorted(self):
        self.assertEqual(total_length([(20, 30), (0, 10), (5, 15)]), 25)
