"""The HTTP edge shared by every web surface: the request guard (``edge``)."""
