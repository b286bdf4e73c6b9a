"""loadkit's built-in scenarios, installed as the package `loadkit.scenarios`.

Each module here is an ordinary locustfile (`locust -f scenarios/burst_2x.py`
works). Importing this package imports none of them, so it never pulls in
Locust: `loadkit.load.catalog` finds them by file name.
"""
