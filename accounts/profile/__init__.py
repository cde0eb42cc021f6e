"""A person's own settings (name, email, password, sessions, two-factor sign-in) and the
owners' team rename: services, forms, views and urls of the "Your settings" page."""
