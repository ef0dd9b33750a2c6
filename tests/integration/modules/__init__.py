"""Module-level tests of the store, the segment and the runtime: each calls one module
directly, one behaviour per test, on the real database (``make coverage-modules``)."""
