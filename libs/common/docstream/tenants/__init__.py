"""What docstream holds per tenant: who a caller is (``tenancy``), what it may submit (``admission``, with the
bounds on its JSON in ``json_input`` and on its webhook addresses in ``addresses``), and its ledger of use
(``usage``)."""
