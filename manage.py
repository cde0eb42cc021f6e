#!/usr/bin/env python
"""Django's command-line utility. With no DATABASE_URL / REDIS_URL configured it first
makes sure the embedded PostgreSQL and Redis are up (see config/embedded.py), and stops them
again when it ends if it was the last process using them (docs/operations/processes.md, "Stopping")."""

import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config.embedded import ensure_services, load_dotenv

    load_dotenv()
    ensure_services()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
