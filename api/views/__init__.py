"""The LMS API, /api/v1/ (docs/lms.md "REST API"), one module per resource. Thin: authenticate (a token),
check its scope, validate, one service or selector call, render. Every object is looked up through
the token's institution, so another institution's course or session is a 404, never a 403.

``common`` holds what the resources share; its underscored helpers are private to this package.
"""
