"""The HTTP face (``mnemofs serve``): the seed's memory stores API over ``MemoryService``.

Only this package imports FastAPI and uvicorn, and only ``mnemofs serve`` imports it.
"""
