"""Adapters for samplers written elsewhere: ``conventions`` holds the conversions every adapter needs;
each third-party kernel gets a module of its own (``flashinfer``; ``sglang``: SGLang's tree verifiers, on
``tree_layout``'s linked lists), which imports that kernel only when it is used."""
