"""A job module that raises on import (a missing setting), as a broken deployment does."""

raise RuntimeError("ORDERS_BUCKET is not set\n(second line of the message)")
