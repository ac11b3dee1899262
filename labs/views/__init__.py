"""The portal's HTML pages, one module for each kind of user: ``student`` (launching and using a
lab), ``instructor`` (the instructor console) and ``operator`` (the operator console)."""
