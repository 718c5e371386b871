"""Daily sales report from the shop's CSV export."""

import csv
import sys


def load_sales(path):
    """Rows of the export: product, quantity, unit_price."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def total_revenue(rows):
    """The sum of quantity times unit price over the rows."""
    return sum(int(row["quantity"]) * int(row["unit_price"]) for row in rows)


def format_report(rows):
    lines = [f"Orders: {len(rows)}", f"Total revenue: {total_revenue(rows):.2f}"]
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_report(load_sales(sys.argv[1])))
