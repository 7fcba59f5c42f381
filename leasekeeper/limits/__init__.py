"""Rate limits per job type and per tenant, and where dispatch checks them."""
