/* Growable arrays for the sorted tables of the memory layer and registry. */
#include "base.h"

#include <stdlib.h>

bool zcopy_array_reserve(void **array, size_t *capacity, size_t count,
                         size_t elem_size)
{
    size_t new_capacity;
    void *p;

    if (count < *capacity)
        return true;
    new_capacity = *capacity ? *capacity * 2 : 16;
    p = realloc(*array, new_capacity * elem_size);
    if (p == NULL)
        return false;
    *array = p;
    *capacity = new_capacity;
    return true;
}
