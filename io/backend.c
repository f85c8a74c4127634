/* io/backend.c — placeholder: being written (see its issue). */
extern int kvs_placeholder_backend;
