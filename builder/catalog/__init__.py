"""The known-good catalog: which digest passed what (records), where it lives (store), and how
people ask for one (query). Pure apart from the store's file I/O; no Docker here."""
