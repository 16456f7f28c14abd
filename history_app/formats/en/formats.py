# Django looks these up for "en-us" after "en_US" finds no module here; anything not set
# falls back to Django's own English formats. The site's templates name their format
# ("Y-m-d H:i:s") explicitly, so these change what the admin shows, where Django used
# "Nov. 30, 2026, 10 p.m.", to match them.
DATETIME_FORMAT = "Y-m-d H:i:s"
DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
SHORT_DATE_FORMAT = "Y-m-d"
