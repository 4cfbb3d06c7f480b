# Writes OUT: the file IN as a NUL-terminated C string named NAME (default attn_schema_sql).
if(NOT NAME)
  set(NAME attn_schema_sql)
endif()
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
file(WRITE ${OUT}.tmp "/* generated from ${IN} */\nconst char ${NAME}[] = {${hex}0x00};\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
