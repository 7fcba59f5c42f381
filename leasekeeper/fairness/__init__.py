"""Which ready job goes next: priority classes by weight, tenants by weighted fair queuing."""
