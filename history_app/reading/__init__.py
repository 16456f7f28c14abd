"""Reading: the pages, their JSON twins and the services that build their contexts."""
