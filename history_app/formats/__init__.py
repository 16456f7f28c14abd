"""Date formats for the pages that use Django's locale formats (the admin): the same
"2026-11-30 22:00:00" the rest of the site writes with an explicit "Y-m-d H:i:s"."""
