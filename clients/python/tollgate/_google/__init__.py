"""google.api.field_behavior, the one option the API imports."""
