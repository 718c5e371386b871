import unittest

from inventory import Inventory, InventoryError


class InventoryTest(unittest.TestCase):
    def test_add(self):
        inv = Inventory()
        inv.add("bolt", 10)
        inv.add("bolt", 5)
        inv.add("nut", 1)
        self.assertEqual(inv.count("bolt"), 15)
        self.assertEqual(inv.skus(), ["bolt", "nut"])

    def test_add_rejects_non_positive(self):
        with self.assertRaises(InventoryError):
            Inventory().add("bolt", 0)
