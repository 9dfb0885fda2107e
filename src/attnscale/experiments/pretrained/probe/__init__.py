"""The probe: per-head statistics of q and k against the seed's assumptions (stats), the run over a model and texts (run), and the summaries over heads (summary)."""
