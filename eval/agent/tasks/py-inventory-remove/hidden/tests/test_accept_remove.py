import unittest

from inventory import Inventory, InventoryError


class AcceptRemoveTest(unittest.TestCase):
    def setUp(self):
        self.inv = Inventory()
        self.inv.add("bolt", 10)
        self.inv.add("nut", 3)

    def test_remove(self):
        self.inv.remove("bolt", 4)
        self.assertEqual(self.inv.count("bolt"), 6)

    def test_remove_all_drops_sku(self):
        self.inv.remove("nut", 3)
        self.assertEqual(self.inv.count("nut"), 0)
        self.assertEqual(self.inv.skus(), ["bolt"])

    def test_remove_too_many(self):
        with self.assertRaises(InventoryError):
            self.inv.remove("nut", 4)
        self.assertEqual(self.inv.count("nut"), 3)

    def test_remove_unknown(self):
        with self.assertRaises(InventoryError):
            self.inv.remove("washer", 1)
        self.assertEqual(self.inv.skus(), ["bolt", "nut"])

    def test_remove_non_positive(self):
        with self.assertRaises(InventoryError):
            self.inv.remove("bolt", 0)
        self.assertEqual(self.inv.count("bolt"), 10)
