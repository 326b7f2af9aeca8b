func.func @size_c1_elements(%in: tensor<8796093022208x1048576xf32>, %w: tensor<1x8x1048576xf32>,
                            %re: tensor<8796093022208xi32>) {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<8796093022208x1048576xf32>, tensor<1x8x1048576xf32>, tensor<8796093022208xi32>)
      -> tensor<8796093022208x8xf32>
  return
}
