"""What the tests share that is not a fixture: helpers, small data, user modules and the
SuperLink and site-command drivers. Test modules import from here, never from each other."""
