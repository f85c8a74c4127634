# The drop-in promise, checked: both libkvshare.so.1 export the same symbols,
# abidiff finds no ABI difference, and a program linked against the plain library
# runs and passes against the kernel one (swapped by LD_LIBRARY_PATH).
