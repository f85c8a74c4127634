/* io/copy.c — placeholder: being written. */
extern int kvs_placeholder_copy;
