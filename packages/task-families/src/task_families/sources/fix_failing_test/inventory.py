"""Stock bookkeeping for the warehouse tool; a stock maps item name -> units."""


def _line_total(quantity, unit_price):
    return round(quantity * unit_price, 2)


def add_item(stock, name, quantity=1):
    """A copy of stock with quantity more units of name."""
    updated = dict(stock)
    updated[name] = updated.get(name, 0) + quantity
    return updated


def remove_item(stock, name, quantity=1):
    """A copy of stock with quantity fewer units of name; items reaching 0 are dropped."""
    updated = dict(stock)
    left = updated.get(name, 0) - quantity
    if left > 0:
        updated[name] = left
    else:
        updated.pop(name, None)
    return updated


def total_units(stock):
    """All units in stock."""
    return sum(stock.values())


def low_stock(stock, threshold=5):
    """Names with fewer than threshold units, alphabetically."""
    return sorted(name for name, units in stock.items() if units < threshold)


def order_value(order, prices):
    """Price of an order (name -> quantity) at the given unit prices."""
    return round(sum(_line_total(q, prices[name]) for name, q in order.items()), 2)
