"""The filesystem: a session's stores as directories, through FUSE (pyfuse3 + trio).

Only this package imports pyfuse3. ``core`` is the filesystem in domain terms, ``adapter``
translates FUSE requests, ``mount`` runs the daemon.
"""
