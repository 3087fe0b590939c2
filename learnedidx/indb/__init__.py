"""In-database ML for PostgreSQL (DAnA design): Striders, engine, DSL, algorithms."""
