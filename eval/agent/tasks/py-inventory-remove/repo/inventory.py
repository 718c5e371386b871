"""Stock levels of the warehouse."""


class InventoryError(Exception):
    """A stock change that cannot be made."""


class Inventory:
    def __init__(self):
        self._stock = {}

    def add(self, sku, quantity):
        """Put quantity items of sku into stock."""
        if quantity <= 0:
            raise InventoryError(f"quantity must be positive, got {quantity}")
        self._stock[sku] = self._stock.get(sku, 0) + quantity

    def count(self, sku):
        return self._stock.get(sku, 0)

    def skus(self):
        """The skus in stock, sorted."""
        return sorted(self._stock)
