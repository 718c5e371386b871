import os
import tempfile
import unittest

from report import format_report, load_sales, total_revenue


class AcceptCentsTest(unittest.TestCase):
    def test_prices_with_cents(self):
        rows = [
            {"product": "tea", "quantity": "3", "unit_price": "4.50"},
            {"product": "clip", "quantity": "3", "unit_price": "0.10"},
            {"product": "mug", "quantity": "1", "unit_price": "8"},
        ]
        self.assertAlmostEqual(float(total_revenue(rows)), 21.8, places=9)
        self.assertEqual(format_report(rows), "Orders: 3\nTotal revenue: 21.80")

    def test_from_csv(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "sales.csv")
            with open(path, "w", encoding="utf-8") as f:
                f.write("product,quantity,unit_price\npen,10,1.99\n")
            rows = load_sales(path)
        self.assertEqual(format_report(rows), "Orders: 1\nTotal revenue: 19.90")
