import unittest

from report import format_report, total_revenue


class ReportTest(unittest.TestCase):
    rows = [
        {"product": "mug", "quantity": "2", "unit_price": "8"},
        {"product": "tea", "quantity": "1", "unit_price": "5"},
    ]

    def test_total(self):
        self.assertEqual(total_revenue(self.rows), 21)

    def test_format(self):
        self.assertEqual(format_report(self.rows), "Orders: 2\nTotal revenue: 21.00")
