/* core/cache.c — placeholder: being written (see its issue). */
extern int kvs_placeholder_cache;
