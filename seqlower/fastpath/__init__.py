"""The protobuf boundary around the lowering core: the sequence region cut out and
spliced back (``regions``), repeated webs lowered once (``repeats``), the protobuf API
(``pipeline``) and the one road of the API and the CLI (``job``)."""
